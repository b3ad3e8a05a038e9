select so.name, so.ts - (select min(ts) from slice) as out_ts, si.name, si.ts - (select min(ts) from slice) as in_ts
from flow f join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in
order by out_ts, in_ts, so.name;
