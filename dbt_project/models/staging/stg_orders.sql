with

source as (

    select * from {{ source('warehouse', 'orders_daily') }}

),

renamed as (

    select
        order_id,
        order_date,
        -- ISO week: the Monday on or before order_date
        date_trunc('week', order_date)::date as week_start,
        ordered_at,
        customer_id,
        country,
        currency,
        gross_amount,
        discount_amount,
        tax_amount,
        net_amount,
        fx_rate,
        net_revenue_usd,
        status,
        is_cancelled

    from source

    -- valid orders: keyed, dated and attributed to a customer (same rule as fct_daily_revenue)
    where order_id is not null
        and order_date is not null
        and customer_id is not null

)

select * from renamed
