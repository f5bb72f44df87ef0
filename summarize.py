import json, collections, sys
rs = [json.loads(l) for l in open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/p41/results.jsonl")]
c = collections.Counter((r["target"], r["outcome"]) for r in rs)
print(len(rs), sorted(c.items()))
for r in rs:
    if r["outcome"] != "ok":
        print(f'{r["kernel"]:45s} {r["target"]:4s} s{r["seed"]} {r["outcome"]:6s} {r["stage"][:30]:30s} {r["reason"][-230:]}')
