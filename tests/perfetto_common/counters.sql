select case when t.name like '% value' then substr(t.name, 1, length(t.name) - 6) else t.name end as counter,
  c.ts - (select min(ts) from slice) as ts, c.value
from counter c join track t on c.track_id = t.id
order by counter, ts;
