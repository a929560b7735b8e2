"""PostgreSQL as a server family: a private server, its settings, its sysbench and
pgbench workloads, and the account of its memory. Only this package uses psycopg to
reach a server under test or names PostgreSQL's binaries."""
