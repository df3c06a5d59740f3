"""Concurrency sweep (`sparkops bench sweep`): the batch client at several concurrencies over
the same records, summarised as the seed's table, a Markdown report and plots."""
