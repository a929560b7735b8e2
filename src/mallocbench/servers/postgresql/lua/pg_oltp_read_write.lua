-- oltp_read_write, sysbench's own script, with the harness's report lines.
require("oltp_read_write")
require("mb_pgsql_report")
