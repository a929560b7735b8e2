-- oltp_update_index, sysbench's own script, with the harness's report lines.
require("oltp_update_index")
require("mb_pgsql_report")
