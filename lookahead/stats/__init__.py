"""Statistics of the lookahead-bias test: fixed-effects regressions (pyfixest, with
reghdfe's small-sample conventions), the protocol's specifications, the verdict rule,
and an equivalent Stata do-file for users who run reghdfe themselves."""

from lookahead.stats.fe_regression import (
    RESULT_COLUMNS,
    FitRequest,
    NotEstimable,
    RegressionInputError,
    Term,
    fit_fe,
    newey_west_default_lag,
    one_sided_p,
)

__all__ = [
    "RESULT_COLUMNS",
    "FitRequest",
    "NotEstimable",
    "RegressionInputError",
    "Term",
    "fit_fe",
    "newey_west_default_lag",
    "one_sided_p",
]
