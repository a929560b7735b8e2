-- oltp_point_select, sysbench's own script, with the harness's report lines.
require("oltp_point_select")
require("mb_pgsql_report")
