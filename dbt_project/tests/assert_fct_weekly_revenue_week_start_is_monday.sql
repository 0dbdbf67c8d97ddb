-- week_start is the ISO Monday; any other day means rows were bucketed by a non-ISO week.
select
    week_start,
    country

from {{ ref('fct_weekly_revenue') }}

where extract(isodow from week_start) != 1
