"""verify: prove an installed vLLM wheel works on this machine, check by check."""
