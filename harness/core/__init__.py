"""What every process shares, with no torch and nothing of ours outside this package: the verdict
vocabularies, records and their store, the typed messages between processes and their channel, the
layered config, the secret plan, and the pure rules (integrity, pairing statistics, the null floor)
that the parent, the judge and the worker all apply."""
