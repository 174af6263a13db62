import json,sys,statistics as st
rows=[json.loads(l) for l in open(sys.argv[1] if len(sys.argv)>1 else __import__('os').environ.get('AB','/tmp/ab')+'/results.jsonl')]
print("| C | workload | round | store | ops/s | p50 ms | p99 ms | master CPU % | master CPU ms/entry | ops/entry |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    cpu_ms_entry = r['master_cpu_pct']/100*r['wall_s']*1000/max(r['entries'],1)
    r['cpu_ms_entry']=cpu_ms_entry
    print(f"| {r['clients']} | {r['workload']} | {r['tag']} | {r['store']} | {r['ops_per_s']:.0f} | {r['p50_us']/1000:.1f} | {r['p99_us']/1000:.1f} | {r['master_cpu_pct']:.0f} | {cpu_ms_entry:.3f} | {r['ops_per_s']*10/ max(r['entries'],1):.1f} |")
print()
print("| C | workload | badger median ops/s (p50/p99 ms) | wal median ops/s (p50/p99 ms) | wal/badger ops | p50 | p99 | master CPU/entry |")
print("|---|---|---|---|---|---|---|---|")
keys=sorted(set((r['clients'],r['workload']) for r in rows))
for c,w in keys:
    m={}
    for s in ('badger','wal'):
        rs=[r for r in rows if r['clients']==c and r['workload']==w and r['store']==s]
        if not rs: break
        m[s]={k:st.median([r[k] for r in rs]) for k in ('ops_per_s','p50_us','p99_us','cpu_ms_entry')}
        m[s]['n']=len(rs)
    if len(m)<2: continue
    b,a=m['badger'],m['wal']
    print(f"| {c} | {w} | {b['ops_per_s']:.0f} ({b['p50_us']/1000:.1f}/{b['p99_us']/1000:.1f}) n={b['n']} | {a['ops_per_s']:.0f} ({a['p50_us']/1000:.1f}/{a['p99_us']/1000:.1f}) n={a['n']} | {a['ops_per_s']/b['ops_per_s']:.2f} | {a['p50_us']/b['p50_us']:.2f} | {a['p99_us']/b['p99_us']:.2f} | {a['cpu_ms_entry']/b['cpu_ms_entry']:.2f} |")
