"""publish: the static per-variant index, uploads to index servers, install commands."""
