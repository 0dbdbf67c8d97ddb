"""The example pipeline: synthetic orders -> orders_daily -> dbt marts."""
