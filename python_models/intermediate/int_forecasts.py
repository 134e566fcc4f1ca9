"""Forecast answers of the current study mapped to labels and mu_hat.

The parser is lookahead.scoring.parse_forecast with the study's label mapping (var
forecast_labels), the very function the forecast job uses for its 95% parse-rate stop:
one parser, so the job and the panel agree on every answer. One row per line of
int_forecast_lines (the lines whose key the study asks for); a second line for a row
fails gate_forecasts.

Speed: the parser runs once per distinct answer (a study of 91,361 rows has a handful
of distinct answers), and the lines never leave DuckDB: the parsed answers are joined
back in SQL and the model returns a DuckDB relation, not a pandas copy of every line."""

import pandas as pd


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.scoring import parse_forecast
    from lookahead.stats.protocol import study_from_frame

    settings = dbt.ref("study_settings").df()
    labels = study_from_frame(settings).prompts.forecast_labels
    lines = dbt.ref("int_forecast_lines")
    distinct = [r[0] for r in lines.project("response_text").distinct().fetchall() if r[0] is not None]
    parsed = [parse_forecast(r, labels) for r in distinct]
    answers = session.from_df(
        pd.DataFrame(
            {
                "response_text": pd.array(distinct, dtype="string"),
                "forecast_label": pd.array([p[0] for p in parsed], dtype="string"),
                "mu_hat": pd.array([p[1] for p in parsed], dtype="Float64"),
            }
        )
    )
    return (
        lines.set_alias("line")
        .join(answers.set_alias("answer"), "line.response_text = answer.response_text", how="left")
        .project("""
        cast(line.key as varchar) as forecast_key,
        cast(line.row_id as varchar) as row_id,
        line.response_text,
        cast(answer.forecast_label as varchar) as forecast_label,
        cast(answer.mu_hat as double) as mu_hat,
        case
            when line.response_text is null then 'no response'
            when answer.forecast_label is not null then 'parsed'
            else 'unparsed'
        end as parse_status,
        cast(line.first_token_prob as double) as first_token_prob,
        cast(line.stated_confidence as double) as stated_confidence,
        cast(line.approximated as boolean) as approximated
    """)
    )
