{#
    backfill_assets: build impacted dbt models into shadow relations before a swap.

    Copy this file into your dbt project's macros/ folder (the repository's dbt_project/ has it).
    Without the var `backfill_assets_shadow` it changes nothing: every model keeps its alias and
    every source its table.

    During a backfill's swap, backfill_assets runs `dbt build` with
        --vars '{"backfill_assets_shadow": {"<model or source table>": "<shadow relation>", ...}}'
    so that the selected models are written to their shadow relations (never the live ones), read
    each other's shadows, and read the target through an overlay of its validated shadow. Their
    dbt tests then run against those shadows. The swap publishes them with the target in one
    transaction. backfill_assets refuses to build in shadow unless both macros below are in the
    project's manifest.
#}

{% macro generate_alias_name(custom_alias_name=none, node=none) -%}
    {%- set shadow = var('backfill_assets_shadow', {}) -%}
    {%- if node is not none and node.name in shadow -%}
        {{ return(shadow[node.name]) }}
    {%- endif -%}
    {{ return(default__generate_alias_name(custom_alias_name, node)) }}
{%- endmacro %}


{% macro source(source_name, table_name) -%}
    {%- set relation = builtins.source(source_name, table_name) -%}
    {%- set shadow = var('backfill_assets_shadow', {}) -%}
    {%- if relation.identifier in shadow -%}
        {{ return(relation.incorporate(path={"identifier": shadow[relation.identifier]})) }}
    {%- endif -%}
    {{ return(relation) }}
{%- endmacro %}
