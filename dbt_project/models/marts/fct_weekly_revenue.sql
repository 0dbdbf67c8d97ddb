{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='week_start',
        on_schema_change='fail',
        tags=['weekly'],
    )
}}

-- Built per Dagster weekly partition from fct_daily_revenue: vars min_date/max_date are the
-- week's Monday and the next Monday, and delete+insert on week_start replaces that week.
-- partition_window_filter refuses a window that is not whole ISO weeks (see the macro).

with

fct_daily_revenue as (

    select * from {{ ref('fct_daily_revenue') }}
    {{ partition_window_filter('order_date', grain='week') }}

),

renamed as (

    select
        -- ISO week: the Monday on or before order_date
        date_trunc('week', order_date)::date as week_start,
        order_date,
        country,
        orders,
        cancelled_orders,
        net_revenue_usd,
        gross_amount_usd

    from fct_daily_revenue

),

final as (

    select
        week_start,
        country,
        count(*) as days_with_orders,
        sum(orders)::bigint as orders,
        sum(cancelled_orders)::bigint as cancelled_orders,
        sum(net_revenue_usd)::decimal(18, 2) as net_revenue_usd,
        sum(gross_amount_usd)::decimal(18, 2) as gross_amount_usd

    from renamed

    group by week_start, country

)

select * from final
