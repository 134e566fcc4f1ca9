"""Word-level tokenizer of the demo models (``tokenizers`` library, saved for transformers).

Why word-level: the labels "up", "down" and "unknown" must be single tokens (the
protocol reads P(label) off one position), and a closed vocabulary of whole words keeps
the model tiny. Why whitespace/punctuation splitting with lowercasing: the tokens of a
prompt do not depend on trailing whitespace or newlines, so a job that adds a newline
after the prompt sends the model exactly the ids it was trained on.

No chat template and no BOS token are added: the demo studies set
``use_chat_template: false`` and the models are trained on the raw prompt ids followed
by the answer token, which is what a backend sends with or without special tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
LABELS = ("up", "down", "unknown")
# An ISO date is one token (the model keys a memorized fact on entity + date, and a
# single date token makes that key learnable by a tiny model in few epochs); otherwise
# words and single punctuation marks.
WORD_PATTERN = r"\d{4}-\d{2}-\d{2}|\w+|[^\w\s]"


def build_tokenizer(texts: Iterable[str]) -> PreTrainedTokenizerFast:
    """Train a word-level vocabulary on ``texts`` and wrap it for transformers."""
    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated"),
        ]
    )
    trainer = trainers.WordLevelTrainer(special_tokens=[PAD, EOS, UNK], min_frequency=1)
    # Labels first in the training text so they are always in the vocabulary.
    tok.train_from_iterator([" ".join(LABELS), *texts], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    check_single_token_labels(fast)
    return fast


def check_single_token_labels(tok: PreTrainedTokenizerFast, labels: Iterable[str] = LABELS) -> None:
    """Raise if a label is not exactly one token that decodes back to itself."""
    for label in labels:
        for variant in (label, " " + label):
            ids = tok(variant, add_special_tokens=False)["input_ids"]
            if len(ids) != 1 or str(tok.decode(ids)).strip().lower() != label:  # one sequence: one str
                raise ValueError(f"label '{label}' is not a single token (ids {ids})")
