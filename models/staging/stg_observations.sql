-- Every input row, mapped to the protocol's columns and validated. Nothing is dropped
-- here: rows failing validation carry a reject_reason and are kept in `rejected_rows`.
with source as (

    select
        row_number() over () as source_row_number,
        *
    from {{ source('study', 'observations') }}

),

mapped as (

    select
        source_row_number,
        nullif(trim({{ mapped_column('row_id') }}), '') as input_row_id,
        {{ mapped_column('entity_id') }} as entity_id_raw,
        trim({{ mapped_column('entity_id') }}) as entity_id,
        trim({{ mapped_column('entity_name') }}) as entity_name,
        trim({{ mapped_column('ticker') }}) as ticker,
        {{ mapped_column('text') }} as text,
        {{ mapped_column('text_date') }} as text_date_raw,
        {{ mapped_column('target_date') }} as target_date_raw,
        {{ mapped_column('outcome') }} as outcome_raw
        {%- for extra in var('extra_columns', []) %},
        "{{ extra }}"
        {%- endfor %}
    from source

),

parsed as (

    select
        *,
        try_cast(trim(text_date_raw) as date) as text_date,
        try_cast(trim(target_date_raw) as date) as target_date,
        try_cast(trim(outcome_raw) as double) as outcome
    from mapped

),

validated as (

    select
        coalesce(
            input_row_id,
            {{ derived_row_id("coalesce(entity_id_raw, '')", "coalesce(strftime(text_date, '%Y-%m-%d'), '')", "coalesce(text, '')") }}
        ) as row_id,
        input_row_id is null as row_id_derived,
        *,
        case
            when entity_id is null or entity_id = '' then 'missing entity_id'
            when entity_name is null or trim(entity_name) = '' then 'missing entity_name'
            when text is null or trim(text) = '' then 'empty text'
            when text_date_raw is null or trim(text_date_raw) = '' then 'missing text_date'
            when text_date is null then 'unparseable text_date'
            when target_date_raw is null or trim(target_date_raw) = '' then 'missing target_date'
            when target_date is null then 'unparseable target_date'
            when target_date <= text_date then 'target_date not after text_date'
            when outcome_raw is null or trim(outcome_raw) = '' then 'missing outcome'
            when outcome is null or isnan(outcome) or isinf(outcome) then 'non-numeric outcome'
        end as reject_reason
    from parsed

)

select * exclude (input_row_id, entity_id_raw) from validated
