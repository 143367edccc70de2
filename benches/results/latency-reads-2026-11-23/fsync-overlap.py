import os, time, threading
def bench(name, fn, n=1500):
    s=[]
    for i in range(n):
        t=time.perf_counter(); fn(i); s.append((time.perf_counter()-t)*1e6)
    s.sort(); print(name, "p50", round(s[len(s)//2]), "p99", round(s[int(len(s)*.99)]))
blk=b"x"*4096
fa=os.open("/var/tmp/fa.bin", os.O_WRONLY|os.O_CREAT|os.O_TRUNC)
bench("append+fdatasync", lambda i: (os.write(fa, blk), os.fdatasync(fa)))
fp=os.open("/var/tmp/fp.bin", os.O_RDWR|os.O_CREAT|os.O_TRUNC)
os.write(fp, b"\0"*(4096*4000)); os.fsync(fp)
bench("overwrite prealloc+fdatasync", lambda i: (os.pwrite(fp, blk, i*4096), os.fdatasync(fp)))
fq=os.open("/var/tmp/fq.bin", os.O_RDWR|os.O_CREAT|os.O_TRUNC)
os.write(fq, b"\0"*(4096*4000)); os.fsync(fq)
# two concurrent overwrite fdatasyncs on two files
def two(i):
    t=threading.Thread(target=lambda: (os.pwrite(fq, blk, i*4096), os.fdatasync(fq)))
    t.start(); os.pwrite(fp, blk, (i+2000)*4096); os.fdatasync(fp); t.join()
bench("two concurrent prealloc", two, 1500)
bench("two serial prealloc", lambda i: (os.pwrite(fq, blk, i*4096), os.fdatasync(fq), os.pwrite(fp, blk, (i+2000)*4096), os.fdatasync(fp)), 1000)
for p in ["fa","fp","fq"]: os.remove(f"/var/tmp/{p}.bin")
