"""The error a bad setting raises, below every module that checks one (lookahead.config,
lookahead.measures, lookahead.rows), so none of them imports another to raise it."""


class StudyConfigError(ValueError):
    """A missing or invalid study setting; the message names the setting."""
