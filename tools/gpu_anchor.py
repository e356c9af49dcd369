"""PyTorch's own per-module times of ResNet-18 on a CUDA device: the anchor that a
bundle's per-layer times are set beside (tools/gpu_check.sh copies this file and
relaytrace's model definitions, ``resnet_models.py``, into the check's directory).

Each leaf module is timed by CUDA events recorded in forward pre- and post-hooks;
per module, its calls in a run summed, the median over ``--repeat`` runs after ``--warmup``; the end-to-end time
of runs without hooks beside them. Prints JSON: {"device", "torch", "e2e_us",
"modules": {module path: median us}}."""

import argparse
import json
import statistics

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--image", type=int, default=224)
    args = p.parse_args()
    import resnet_models  # relaytrace/zoo/models.py, copied: torchvision's module names

    torch.manual_seed(0)
    model = resnet_models.resnet18().eval().cuda()
    x = torch.randn(1, 3, args.image, args.image, device="cuda")
    leaves = {name: m for name, m in model.named_modules() if name and not list(m.children())}
    times: dict[str, list[float]] = {name: [] for name in leaves}
    pending: list = []

    def pre(name):
        def hook(module, inputs):
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            pending.append((name, start))

        return hook

    def post(name):
        def hook(module, inputs, output):
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            started = next(i for i in range(len(pending) - 1, -1, -1) if pending[i][0] == name and len(pending[i]) == 2)
            pending[started] = (name, pending[started][1], end)

        return hook

    with torch.inference_mode():
        for _ in range(args.warmup):
            model(x)
        torch.cuda.synchronize()
        e2e = []
        for _ in range(args.repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            e2e.append(start.elapsed_time(end) * 1e3)
        handles = [m.register_forward_pre_hook(pre(n)) for n, m in leaves.items()]
        handles += [m.register_forward_hook(post(n)) for n, m in leaves.items()]
        for _ in range(args.repeat):
            pending.clear()
            model(x)
            torch.cuda.synchronize()
            run: dict[str, float] = {}
            for name, start, end in pending:  # a module called twice (a block's relu) counts both calls
                run[name] = run.get(name, 0.0) + start.elapsed_time(end) * 1e3
            for name, us in run.items():
                times[name].append(us)
        for h in handles:
            h.remove()
    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "e2e_us": statistics.median(e2e),
                "modules": {n: statistics.median(t) for n, t in times.items() if t},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
