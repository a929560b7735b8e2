-- oltp_read_only, sysbench's own script, with the harness's report lines.
require("oltp_read_only")
require("mb_pgsql_report")
