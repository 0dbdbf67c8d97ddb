-- Grain of fct_daily_revenue is (order_date, country): no pair may appear twice.
select
    order_date,
    country,
    count(*) as rows_for_key

from {{ ref('fct_daily_revenue') }}

group by order_date, country

having count(*) > 1
