"""BM25 candidates from the user's dated corpus, computed in DuckDB.

Why not DuckDB's ``fts`` extension: it is not bundled with the duckdb wheel and is
downloaded on first ``INSTALL fts`` from extensions.duckdb.org; offline that fails,
and the PyPI packages that carry it are built for other DuckDB versions (a build for
1.5.5 refuses to load in the pinned 1.5.6). So the same Okapi BM25 that ``fts`` ranks
with (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) is written out in
SQL here: lower-cased alphanumeric tokens of title and body, no stemming, a short
English stop-word list. It runs anywhere the pinned duckdb runs and gives the same
ranking every time (ties broken by doc_id).

``before`` (optional, per query) keeps only documents published strictly before that
date: TimeSPEC's generator may only see the past.
"""

from __future__ import annotations

import duckdb
import pandas as pd

K1, B = 1.2, 0.75
STOPWORDS = (
    "a",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "by",
    "for",
    "from",
    "has",
    "in",
    "is",
    "it",
    "its",
    "of",
    "on",
    "or",
    "that",
    "the",
    "to",
    "was",
    "were",
    "will",
    "with",
)
TOKEN_REGEX = "[^a-z0-9]+"

_SQL = f"""
with doc_tokens as (
    select doc_id, unnest(string_split_regex(lower(coalesce(title, '') || ' ' || coalesce(body, '')),
                                             '{TOKEN_REGEX}')) as term
    from corpus
),
doc_terms as (
    select doc_id, term from doc_tokens
    where term <> '' and term not in {STOPWORDS}
),
doc_len as (
    select c.doc_id, count(t.term) as dl from corpus c left join doc_terms t using (doc_id) group by c.doc_id
),
stats as (select count(*) as n_docs, avg(dl) as avgdl from doc_len),
tf as (select doc_id, term, count(*) as tf from doc_terms group by doc_id, term),
df as (select term, count(*) as df from tf group by term),
query_terms as (
    select distinct query_id, term from (
        select query_id, unnest(string_split_regex(lower(query_text), '{TOKEN_REGEX}')) as term from queries
    ) where term <> '' and term not in {STOPWORDS}
),
scored as (
    select q.query_id, tf.doc_id,
           sum(ln(1 + (s.n_docs - df.df + 0.5) / (df.df + 0.5))
               * tf.tf * ({K1} + 1) / (tf.tf + {K1} * (1 - {B} + {B} * dl.dl / s.avgdl))) as score
    from query_terms q
    join tf on tf.term = q.term
    join df on df.term = q.term
    join doc_len dl on dl.doc_id = tf.doc_id
    cross join stats s
    group by q.query_id, tf.doc_id
),
allowed as (
    select s.*, c.published_at from scored s
    join corpus c on c.doc_id = s.doc_id
    join queries q on q.query_id = s.query_id
    where q.before is null or c.published_at < q.before
)
select query_id, doc_id, published_at, score,
       row_number() over (partition by query_id order by score desc, doc_id) as rank
from allowed
qualify rank <= $k
order by query_id, rank
"""


def bm25(queries: pd.DataFrame, corpus: pd.DataFrame, k: int) -> pd.DataFrame:
    """Top-``k`` documents per query by BM25 (score > 0 only).

    queries: query_id, query_text, optional before (date); corpus: doc_id, published_at
    (date), title, body. Returns query_id, doc_id, published_at, score, rank."""
    cols = ["query_id", "doc_id", "published_at", "score", "rank"]
    if queries.empty or corpus.empty:
        return pd.DataFrame(columns=cols)
    q = queries.copy()
    if "before" not in q:
        q["before"] = pd.NaT
    q = q[["query_id", "query_text", "before"]]
    q["before"] = pd.to_datetime(q["before"]).dt.date
    c = corpus[["doc_id", "published_at", "title", "body"]].copy()
    c["published_at"] = pd.to_datetime(c["published_at"]).dt.date
    con = duckdb.connect()
    try:
        con.register("queries_df", q)
        con.register("corpus_df", c)
        con.execute(
            "create temp table queries as select query_id::varchar as query_id, "
            "query_text::varchar as query_text, before::date as before from queries_df"
        )
        con.execute(
            "create temp table corpus as select doc_id::varchar as doc_id, "
            "published_at::date as published_at, title::varchar as title, body::varchar as body "
            "from corpus_df"
        )
        return con.execute(_SQL, {"k": int(k)}).df()[cols]
    finally:
        con.close()
