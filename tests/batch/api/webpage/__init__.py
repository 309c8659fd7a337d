"""A stand-in for minidb.batch.web in the shell tests: an index.html and a script."""
