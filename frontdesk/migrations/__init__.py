"""Alembic migrations of every frontdesk table (one environment; see `frontdesk.schema`)."""
