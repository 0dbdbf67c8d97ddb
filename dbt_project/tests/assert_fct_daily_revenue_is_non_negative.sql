-- Revenue of a day and country sums non-cancelled orders only; it can never go below zero,
-- and cancelled orders can never outnumber orders.
select
    order_date,
    country,
    orders,
    cancelled_orders,
    net_revenue_usd,
    gross_amount_usd

from {{ ref('fct_daily_revenue') }}

where net_revenue_usd < 0
    or gross_amount_usd < 0
    or cancelled_orders > orders
