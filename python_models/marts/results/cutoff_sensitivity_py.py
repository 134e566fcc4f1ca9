"""dbt Python model: the protocol's tests with the cutoff moved (one row per cutoff).

At the stated training_cutoff moved by -6, -3, 0, +3 and +6 months and at the estimated
break (effective_cutoff, the verdict's measure): N pre/post, beta_3, the validation
pattern, the placebo and the decision path the rule would take. The verdict still reads
the stated cutoff. Logic: lookahead/stats/sensitivity.py; docs/cutoff.md."""


def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("gate_panel")
    # After the last model that fits (see lap_robustness): the fit counts singletons from
    # warnings recorded process-wide, so fits must not run in parallel threads.
    dbt.ref("lap_robustness")

    from lookahead.stats.sensitivity import build_frame

    return build_frame(dbt.ref("panel"), dbt.ref("study_settings").df(), dbt.ref("effective_cutoff").df())
