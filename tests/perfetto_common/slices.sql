select
  coalesce(parent.name, thread_process.name, track_process.name) as grp,
  coalesce(t.name, th.name, case when t.type = 'chrome_process_instant' then 'frames' end) as track,
  s.name, s.ts - (select min(ts) from slice) as ts, s.dur, s.depth
from slice s join track t on s.track_id = t.id
left join track parent on t.parent_id = parent.id
left join thread_track tt on tt.id = t.id left join thread th on th.utid = tt.utid
left join process thread_process on thread_process.upid = th.upid
left join process_track pt on pt.id = t.id left join process track_process on track_process.upid = pt.upid
order by grp, track, ts, depth, s.name;
