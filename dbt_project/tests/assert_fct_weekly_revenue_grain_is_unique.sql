-- Grain of fct_weekly_revenue is (week_start, country): no pair may appear twice.
select
    week_start,
    country,
    count(*) as rows_for_key

from {{ ref('fct_weekly_revenue') }}

group by week_start, country

having count(*) > 1
