"""Forecast answers of the current study mapped to labels and mu_hat.

The parser is lookahead.scoring.parse_forecast with the study's label mapping (var
forecast_labels), the very function the forecast job uses for its 95% parse-rate stop:
one parser, so the job and the panel agree on every answer. One row per line of
int_forecast_lines (the lines whose key the study asks for); a second line for a row fails gate_forecasts."""

import json

import pandas as pd


def model(dbt, session):
    dbt.config(materialized="table")
    from lookahead.scoring import parse_forecast

    labels = json.loads(dbt.config.get("forecast_labels_json"))
    lines = dbt.ref("int_forecast_lines").df()
    parsed = [parse_forecast(r, labels) for r in lines["response_text"]]
    status = [
        "no response" if r is None or pd.isna(r) else ("parsed" if p[0] is not None else "unparsed")
        for r, p in zip(lines["response_text"], parsed)
    ]
    return pd.DataFrame({
        "forecast_key": lines["key"].astype(str),
        "row_id": lines["row_id"].astype(str),
        "response_text": lines["response_text"],
        "forecast_label": pd.array([p[0] for p in parsed], dtype="string"),
        "mu_hat": pd.array([p[1] for p in parsed], dtype="Float64"),
        "parse_status": status,
        "first_token_prob": lines["first_token_prob"].astype("Float64"),
        "stated_confidence": lines["stated_confidence"].astype("Float64"),
        "approximated": lines["approximated"].astype(bool),
    })
