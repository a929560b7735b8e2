-- oltp_update_non_index, sysbench's own script, with the harness's report lines.
require("oltp_update_non_index")
require("mb_pgsql_report")
