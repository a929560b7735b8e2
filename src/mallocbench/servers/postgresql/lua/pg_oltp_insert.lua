-- oltp_insert, sysbench's own script, with the harness's report lines.
require("oltp_insert")
require("mb_pgsql_report")
