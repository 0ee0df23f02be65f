"""The parent process: executors and lanes, the judge's and the workers' supervision, the reference
pass, one problem's evaluation, the pure verdict, the sanitizer runs, the quiet host, builds ahead,
the run's scratch, and the resources that hold one run's (resources). It starts the judge and
worker processes and never runs model code itself."""
