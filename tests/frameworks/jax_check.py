"""JAX on a GPU, step by step: run natively on the GPU host and in a
virtio-cuda guest (VM suite frameworks, tests/gpu/torch-run.sh), each step
printing "PASS jax/<step> <seconds>" or "FAIL jax/<step> <why>".

Steps: import, devices (the GPU must be JAX's default device: a JAX that
falls back to the CPU fails here), jit (a matmul, against NumPy), grad
(against the gradient worked by hand), train (an MLP trained for some
steps on the GPU and the same steps on JAX's CPU device, parameters
compared).  Run with JAX_PLATFORMS=cuda,cpu.
"""
import os

from steps import Steps

steps = Steps("jax")

jax = jnp = np = None


def s_import():
    global jax, jnp, np
    import jax as j
    import jax.numpy as jn
    import numpy as n
    jax, jnp, np = j, jn, n
    # Full float32 matmuls on the GPU, so that results compare with the CPU's.
    jax.config.update("jax_default_matmul_precision", "highest")
    return "jax %s" % jax.__version__


def why_no_gpu():
    """What JAX says of its CUDA backend (private names: best effort)."""
    out = []
    try:
        from jax._src import hardware_utils, xla_bridge
        out.append("an NVIDIA device node: %s" % hardware_utils.has_visible_nvidia_gpu())
        out.append("backend errors: %r" % (getattr(xla_bridge, "_backend_errors", None),))
    except Exception as e:
        out.append("%s: %s" % (type(e).__name__, e))
    return "; ".join(out)


def s_devices():
    d = jax.devices()
    if not d or d[0].platform != "gpu":
        raise RuntimeError("JAX's devices are %r: no GPU (%s)" % (d, why_no_gpu()))
    return "%s (%s)" % (d[0], getattr(d[0], "device_kind", "?").replace(" ", "_"))


def s_jit():
    n = 512
    x = (jnp.arange(n * n, dtype=jnp.float32).reshape(n, n) % 97) / 97.0
    y = jax.jit(lambda a: a @ a)(x).block_until_ready()
    if list(y.devices())[0].platform != "gpu":
        raise RuntimeError("the result is on %r" % (y.devices(),))
    xc = np.asarray(x, dtype=np.float64)
    c = xc @ xc
    err = float(np.max(np.abs(np.asarray(y) - c) / (np.abs(c) + 1)))
    if err > 1e-4:
        raise RuntimeError("max relative error %g" % err)
    return "%dx%d, max rel err %.2g" % (n, n, err)


def s_grad():
    n = 512
    x = (jnp.arange(n * n, dtype=jnp.float32).reshape(n, n) % 97) / 97.0
    w = jnp.ones((n,), jnp.float32) * 0.01
    g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
    xn, wn = np.asarray(x, np.float64), np.asarray(w, np.float64)
    gc = xn.T @ (1 - np.tanh(xn @ wn) ** 2)
    err = float(np.max(np.abs(np.asarray(g) - gc) / (np.abs(gc) + 1)))
    if err > 1e-4:
        raise RuntimeError("max relative error %g" % err)
    return "max rel err %.2g" % err


def train(dev, steps):
    """An MLP fitted to a smooth function with plain SGD, on device dev."""
    with jax.default_device(dev):
        key = jax.random.PRNGKey(0)
        k1, k2, k3 = jax.random.split(key, 3)
        xs = jax.random.uniform(k1, (256, 8), minval=-1.0, maxval=1.0)
        ys = jnp.sin(xs.sum(axis=1, keepdims=True))
        params = [jax.random.normal(k2, (8, 64)) * 0.3, jnp.zeros((64,)),
                  jax.random.normal(k3, (64, 1)) * 0.3, jnp.zeros((1,))]

        def loss(p, x, y):
            h = jnp.tanh(x @ p[0] + p[1])
            return jnp.mean((h @ p[2] + p[3] - y) ** 2)

        @jax.jit
        def update(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)
            return [a - 0.1 * b for a, b in zip(p, g)], l

        first = None
        for i in range(steps):
            params, l = update(params, xs, ys)
            if i == 0:
                first = float(l)
        return first, float(l), [np.asarray(a) for a in params]


def s_train():
    n = int(os.environ.get("VCU_JAX_STEPS", "200"))
    f0, l0, p0 = train(jax.devices()[0], n)
    f1, l1, p1 = train(jax.devices("cpu")[0], n)
    if not l0 < f0 * 0.5:
        raise RuntimeError("loss %g -> %g did not fall" % (f0, l0))
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(p0, p1))
    if err > 1e-3:
        raise RuntimeError("parameters differ from the CPU's by %g" % err)
    return "%d steps, loss %.4f -> %.4f, params vs CPU %.2g" % (n, f0, l0, err)


steps.step("import", s_import)
if jax is not None:
    steps.run((("devices", s_devices), ("jit", s_jit), ("grad", s_grad), ("train", s_train)),
              "devices")
steps.done()
