"""What a user brings, read as text and never executed here: problems, candidates, raw LLM
completions and KernelBench's sample folders. Runs in the parent; imports only harness.core."""
