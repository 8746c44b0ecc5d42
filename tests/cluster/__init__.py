"""Multi-host tests: hosts made of Linux namespaces running an archive, a publisher and a Spark cluster (issue 10)."""
