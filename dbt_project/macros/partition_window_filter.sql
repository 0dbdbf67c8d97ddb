{#
    The partition window of a run, as a `where` clause on `column`.

    Dagster passes the partition as dbt vars `min_date` and `max_date`: ISO dates, half-open
    [min_date, max_date). With neither var set the macro renders nothing and the model builds
    every day. The dates are parsed and re-rendered, so only a well-formed date reaches the SQL.

    grain='week' also requires whole ISO weeks (min_date a Monday, a whole number of weeks):
    a model keyed by week_start deletes every row of a week it writes, so a partial window
    would replace a full week with part of it. That check runs only when the model executes,
    since vars are global to an invocation and every model is rendered at parse time.
#}
{% macro partition_window_filter(column, grain='day') -%}
    {%- set min_date = var('min_date', none) -%}
    {%- set max_date = var('max_date', none) -%}
    {%- if min_date is none and max_date is none -%}
        {#- no window: build everything -#}
    {%- elif min_date is none or max_date is none -%}
        {{ exceptions.raise_compiler_error(
            "pass both vars min_date and max_date (half-open [min_date, max_date)), or neither;"
            ~ " got min_date=" ~ min_date ~ ", max_date=" ~ max_date
        ) }}
    {%- else -%}
        {%- set lo = _partition_window_date('min_date', min_date) -%}
        {%- set hi = _partition_window_date('max_date', max_date) -%}
        {%- if hi <= lo -%}
            {{ exceptions.raise_compiler_error(
                "max_date " ~ hi ~ " must be after min_date " ~ lo ~ " (window is [min_date, max_date))"
            ) }}
        {%- endif -%}
        {#- Only at execution: dbt renders every model while parsing, with the run's vars, so a
            daily partition's window must not fail the parse of this weekly model. -#}
        {%- if execute and grain == 'week' and (lo.weekday() != 0 or (hi - lo).days % 7 != 0) -%}
            {{ exceptions.raise_compiler_error(
                "this model is built per ISO week: min_date must be a Monday and max_date a later"
                ~ " Monday; got [" ~ lo ~ ", " ~ hi ~ ")"
            ) }}
        {%- endif -%}
        where {{ column }} >= '{{ lo.isoformat() }}'::date and {{ column }} < '{{ hi.isoformat() }}'::date
    {%- endif -%}
{%- endmacro %}


{#- A var value (an ISO string, or a date when YAML parsed an unquoted value) as a date. -#}
{% macro _partition_window_date(name, value) -%}
    {%- set text = value | string -%}
    {%- if not modules.re.match('^[0-9]{4}-[0-9]{2}-[0-9]{2}$', text) -%}
        {{ exceptions.raise_compiler_error(
            "var " ~ name ~ " must be an ISO date like 2026-01-05, got " ~ text
        ) }}
    {%- endif -%}
    {{ return(modules.datetime.datetime.strptime(text, '%Y-%m-%d').date()) }}
{%- endmacro %}
