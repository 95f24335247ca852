#!/usr/bin/env python3
"""JAX on our libcuda.so.1: devices, a jit matmul and a grad, each checked
against NumPy on the CPU.  Run natively on a GPU host against the
loopback build (tests/gpu/jax-loopback.sh), the first step before JAX in a
guest: a JAX that falls back to the CPU fails at jax.devices() here, since
the script runs with JAX_PLATFORMS=cuda."""
import jax, jax.numpy as jnp, numpy as np
print('devices', jax.devices(), flush=True)
x = (jnp.arange(512 * 512, dtype=jnp.float32).reshape(512, 512) % 97) / 97.0
y = jax.jit(lambda a: a @ a)(x).block_until_ready()
c = np.asarray(x, dtype=np.float64) @ np.asarray(x, dtype=np.float64)
print('jit matmul max rel err', float(np.max(np.abs(np.asarray(y) - c) / (np.abs(c) + 1))), flush=True)
w = jnp.ones((512,), jnp.float32) * 0.01
g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
gc = np.asarray(x).T @ (1 - np.tanh(np.asarray(x) @ np.asarray(w)) ** 2)
print('grad max err', float(np.max(np.abs(np.asarray(g) - gc))), flush=True)
