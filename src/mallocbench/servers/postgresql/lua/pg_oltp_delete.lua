-- oltp_delete, sysbench's own script, with the harness's report lines.
require("oltp_delete")
require("mb_pgsql_report")
