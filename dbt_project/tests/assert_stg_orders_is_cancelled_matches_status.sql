-- is_cancelled must mean exactly "status is cancelled or refunded": the marts trust the flag
-- to decide which orders earn revenue.
select
    order_id,
    status,
    is_cancelled

from {{ ref('stg_orders') }}

where is_cancelled != (status in ('cancelled', 'refunded'))
