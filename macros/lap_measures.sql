{#- Generated from lookahead/measures.py by `python scripts/generated_files.py --write-macro`;
    do not edit (tests/python/test_measures.py holds it to the registry). -#}
{% macro lap_measure_registry() -%}
  {{ return([
    {"name": "recall", "column": "lap_recall", "model": "int_recall_pairs", "model_column": "lap", "key_column": "recall_key", "join_on": ["entity_id", "target_date"], "carried": ["p_up", "p_down", "p_unknown", "up_censored", "down_censored", "unknown_censored", "residual_mass", "ud"]},
    {"name": "mink", "column": "lap_mink", "model": "int_mink_scores", "model_column": "lap_mink", "key_column": "mink_key", "join_on": ["row_id"], "carried": []},
    {"name": "loss", "column": "lap_loss", "model": "int_lap_loss", "model_column": "lap_loss", "key_column": null, "join_on": ["row_id"], "carried": []},
    {"name": "zlib", "column": "lap_zlib", "model": "int_lap_zlib", "model_column": "lap_zlib", "key_column": null, "join_on": ["row_id"], "carried": []},
    {"name": "minkpp", "column": "lap_minkpp", "model": "int_lap_minkpp", "model_column": "lap_minkpp", "key_column": null, "join_on": ["row_id"], "carried": []},
    {"name": "reference", "column": "lap_reference", "model": "int_lap_reference", "model_column": "lap_reference", "key_column": null, "join_on": ["row_id"], "carried": []}
  ]) }}
{%- endmacro %}
