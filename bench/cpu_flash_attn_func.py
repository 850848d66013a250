"""flash_attn_func (CPU tensors, autograd) against torch SDPA on the CPU: forward+backward, interleaved
rounds, median times; prints flashattn / torch speed per cell. OMP_NUM_THREADS=2 python bench/cpu_flash_attn_func.py"""
import time, statistics, torch, flashattn
import torch.nn.functional as F
torch.manual_seed(0)
def run(dtype, d, s, causal, rounds=9):
    q,k,v=[torch.randn(1,s,2,d,dtype=dtype,requires_grad=True) for _ in range(3)]
    qt,kt,vt=[x.detach().transpose(1,2).contiguous().requires_grad_() for x in (q,k,v)]
    go=torch.randn(1,s,2,d,dtype=dtype); got=go.transpose(1,2).contiguous()
    def fa():
        o=flashattn.flash_attn_func(q,k,v,causal=causal); torch.autograd.grad(o,(q,k,v),go)
    def th():
        o=F.scaled_dot_product_attention(qt,kt,vt,is_causal=causal); torch.autograd.grad(o,(qt,kt,vt),got)
    fa(); th()
    tf=[];tt=[]
    for r in range(rounds):
        for f,l in ((fa,tf),(th,tt)) if r%2==0 else ((th,tt),(fa,tf)):
            time.sleep(0.05); t0=time.perf_counter(); f(); l.append(time.perf_counter()-t0)
    return statistics.median(tt)/statistics.median(tf)
for dtype in (torch.float32, torch.bfloat16):
    for d in (64,128):
        for s in (512,1024,2048,4096):
            for c in (False,True):
                print(dtype, d, s, c, "fa/torch speed %.2fx" % run(dtype,d,s,c), flush=True)
