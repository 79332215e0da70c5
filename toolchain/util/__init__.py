"""Shared helpers every stage uses: running programs, files, units, data files, the network."""
