with

stg_orders as (

    select * from {{ ref('stg_orders') }}

),

final as (

    select
        customer_id,
        min(order_date) as first_order_date,
        max(order_date) as last_order_date,
        count(*) as orders,
        coalesce(sum(net_revenue_usd) filter (where not is_cancelled), 0)::decimal(18, 2)
            as lifetime_net_revenue_usd

    from stg_orders

    group by customer_id

)

select * from final
