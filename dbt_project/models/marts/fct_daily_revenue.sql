{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='order_date',
        on_schema_change='fail',
        tags=['daily'],
    )
}}

-- Built per Dagster daily partition: vars min_date/max_date bound the window [min_date,
-- max_date), and delete+insert on order_date replaces exactly the days the window produced.
-- Reads the source directly (not stg_orders) so the partitioned chain is
-- orders_daily -> fct_daily_revenue -> fct_weekly_revenue, with no unpartitioned hop between.

with

source as (

    select * from {{ source('warehouse', 'orders_daily') }}
    {{ partition_window_filter('order_date') }}

),

renamed as (

    select
        order_date,
        country,
        is_cancelled,
        round(gross_amount * fx_rate, 2) as gross_amount_usd,
        net_revenue_usd

    from source

    -- valid orders (same rule as stg_orders)
    where order_id is not null
        and order_date is not null
        and customer_id is not null

),

final as (

    select
        order_date,
        country,
        count(*) as orders,
        count(*) filter (where is_cancelled) as cancelled_orders,
        coalesce(sum(net_revenue_usd) filter (where not is_cancelled), 0)::decimal(18, 2)
            as net_revenue_usd,
        coalesce(sum(gross_amount_usd) filter (where not is_cancelled), 0)::decimal(18, 2)
            as gross_amount_usd

    from renamed

    group by order_date, country

)

select * from final
