/* Managed globals for tests/gpu/probe-managed-globals.c (as NVIDIA's
 * uvmlite declares them, and one array). */
__managed__ unsigned int xxx = 10;
__managed__ unsigned int yyy = 100;
__managed__ double zzz[3] = { 1, 2, 3 };

extern "C" __global__ void pmg_add(unsigned int *p)
{
    *p += 20;
    yyy += 30;
}
