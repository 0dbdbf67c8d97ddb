"""Synthetic orders, deterministic per day, and the `orders_daily` transform (v1 buggy, v2 fixed).

The story: history of `orders_daily` was built by v1, which converted every order with the FX rate
of the customer's *home* currency instead of the currency the order was paid in, so the ~15% of
cross-border orders carry a wrong `fx_rate` and `net_revenue_usd`. v2 joins on the order's own
currency. Every other column is identical between the two versions.
"""

from __future__ import annotations

COUNTRIES: list[tuple[str, str]] = [
    ("US", "USD"),
    ("GB", "GBP"),
    ("DE", "EUR"),
    ("FR", "EUR"),
    ("IE", "EUR"),
    ("CH", "CHF"),
    ("SE", "SEK"),
    ("JP", "JPY"),
    ("CA", "CAD"),
    ("AU", "AUD"),
]
RATES_TO_USD: list[tuple[str, float]] = [
    ("USD", 1.0),
    ("GBP", 1.27),
    ("EUR", 1.08),
    ("CHF", 1.13),
    ("SEK", 0.095),
    ("JPY", 0.0067),
    ("CAD", 0.73),
    ("AUD", 0.66),
]

RAW_ORDERS = "raw_orders"
FX_RATES = "fx_rates"
COUNTRY_CURRENCY = "country_currency"

RAW_ORDER_COLUMNS: list[tuple[str, str]] = [
    ("order_id", "BIGINT"),
    ("order_date", "DATE"),
    ("ordered_at", "TIMESTAMP"),
    ("customer_id", "BIGINT"),
    ("country", "VARCHAR"),
    ("currency", "VARCHAR"),
    ("amount", "DECIMAL(12,2)"),
    ("discount", "DECIMAL(12,2)"),
    ("tax", "DECIMAL(12,2)"),
    ("status", "VARCHAR"),
    ("updated_at", "TIMESTAMP"),
]

# One day of orders, seeded by the day itself: the same day always yields the same rows.
# Parameters: $day (DATE), $n (orders that day). ~15% of orders pay in a foreign currency.
RAW_ORDERS_SQL = f"""
with base as (
    select
        i,
        $day::date as d,
        hash(i, $day::date, 'order') as h
    from range($n::bigint) as t(i)
),
home as (
    select
        base.*,
        [{", ".join(f"'{c}'" for c, _ in COUNTRIES)}][1 + (h % {len(COUNTRIES)})::int] as country,
        [{", ".join(f"'{cur}'" for _, cur in COUNTRIES)}][1 + (h % {len(COUNTRIES)})::int]
            as home_currency,
        (h >> 8) % 100 as cross_border_roll
    from base
)
select
    (date_diff('day', date '2000-01-01', d) * 1000000 + i)::bigint as order_id,
    d as order_date,
    d::timestamp + to_seconds(((h >> 16) % 86400)::bigint) as ordered_at,
    (1 + (h >> 24) % 50000)::bigint as customer_id,
    country,
    case when cross_border_roll < 15
         then (case when home_currency = 'USD' then 'EUR' else 'USD' end)
         else home_currency end as currency,
    (5 + ((h >> 32) % 49500) / 100.0)::decimal(12, 2) as amount,
    -- a quarter of orders get a discount of 1-9% of the amount (net stays positive)
    (case when (h >> 40) % 4 = 0
          then (5 + ((h >> 32) % 49500) / 100.0) * (1 + (h >> 44) % 9) / 100.0
          else 0 end)::decimal(12, 2) as discount,
    ((5 + ((h >> 32) % 49500) / 100.0) * 0.08)::decimal(12, 2) as tax,
    ['placed', 'shipped', 'shipped', 'shipped', 'cancelled', 'refunded'][1 + ((h >> 48) % 6)::int]
        as status,
    d::timestamp + to_seconds(((h >> 16) % 86400)::bigint + 3600) as updated_at
from home
"""

ORDERS_DAILY_COLUMNS: list[tuple[str, str]] = [
    ("order_id", "BIGINT"),
    ("order_date", "DATE"),
    ("ordered_at", "TIMESTAMP"),
    ("customer_id", "BIGINT"),
    ("country", "VARCHAR"),
    ("currency", "VARCHAR"),
    ("gross_amount", "DECIMAL(12,2)"),
    ("discount_amount", "DECIMAL(12,2)"),
    ("tax_amount", "DECIMAL(12,2)"),
    ("net_amount", "DECIMAL(12,2)"),
    ("fx_rate", "DECIMAL(12,6)"),
    ("net_revenue_usd", "DECIMAL(14,2)"),
    ("status", "VARCHAR"),
    ("is_cancelled", "BOOLEAN"),
]

_SELECT = """
select
    o.order_id,
    o.order_date,
    o.ordered_at,
    o.customer_id,
    o.country,
    o.currency,
    o.amount as gross_amount,
    o.discount as discount_amount,
    o.tax as tax_amount,
    (o.amount - o.discount - o.tax)::decimal(12, 2) as net_amount,
    r.rate_to_usd::decimal(12, 6) as fx_rate,
    round((o.amount - o.discount - o.tax) * r.rate_to_usd::decimal(12, 6), 2)::decimal(14, 2)
        as net_revenue_usd,
    o.status,
    o.status in ('cancelled', 'refunded') as is_cancelled
"""

# v2 (current): the order's own currency.
ORDERS_DAILY_SQL = (
    _SELECT
    + f"""from {RAW_ORDERS} as o
join {FX_RATES} as r on r.currency = o.currency
where o.order_date >= $start and o.order_date < $end
"""
)

# v1 (the bug that history was built with): the customer's home currency.
ORDERS_DAILY_SQL_V1 = (
    _SELECT
    + f"""from {RAW_ORDERS} as o
join {COUNTRY_CURRENCY} as cc on cc.country = o.country
join {FX_RATES} as r on r.currency = cc.currency
where o.order_date >= $start and o.order_date < $end
"""
)

ORDERS_CODE_VERSION = "2"  # bumped when the FX join was fixed (v1 -> v2)
