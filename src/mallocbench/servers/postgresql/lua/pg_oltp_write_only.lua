-- oltp_write_only, sysbench's own script, with the harness's report lines.
require("oltp_write_only")
require("mb_pgsql_report")
