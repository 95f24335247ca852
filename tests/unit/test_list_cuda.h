/*
 * Unit tests of the CUDA executor (host-backend/cuda*.c), in
 * test_cuda.c.  Most run against the CPU stand-in for libcuda
 * (tests/fakecuda, found through $VCU_LIBCUDA, which the unit Makefile
 * sets); without it they fail, saying so.
 */
#ifndef VCU_TEST_LIST_CUDA_H
#define VCU_TEST_LIST_CUDA_H

#define VCU_TESTS_CUDA(X)               \
    X(cuda_htab)                        \
    X(cuda_pset)                        \
    X(cuda_no_driver)                   \
    X(cuda_gpus_config)                 \
    X(cuda_gpus_colon)                  \
    X(cuda_driver_info)                 \
    X(cuda_device_info)                 \
    X(cuda_memcpy_roundtrip)            \
    X(cuda_memcpy_bad_segments)         \
    X(cuda_memset)                      \
    X(cuda_async_header_only_reply)     \
    X(cuda_memcpy2d)                    \
    X(cuda_mem_free_foreign)            \
    X(cuda_ctx_destroy_frees)           \
    X(cuda_ctx_destroy_objects)         \
    X(cuda_mem_range)                   \
    X(cuda_graph_mem_free_params)       \
    X(cuda_tex1d_linear_width)          \
    X(cuda_handles_invalid)             \
    X(cuda_module_unload_kills_funcs)   \
    X(cuda_occupancy_avail_smem)        \
    X(cuda_launch_vector_add)           \
    X(cuda_launch_param_bytes)          \
    X(cuda_launch_ex)                   \
    X(cuda_launch_ex_hostile)           \
    X(cuda_occupancy_clusters)          \
    X(cuda_tensor_map)                  \
    X(cuda_events_elapsed)              \
    X(cuda_streams)                     \
    X(cuda_deferred_error)              \
    X(cuda_batch)                       \
    X(cuda_batch_hostile)               \
    X(cuda_batch_other_session)         \
    X(cuda_batch_feature)               \
    X(cuda_batch_graph_runs)            \
    X(cuda_batch_graph_refused)         \
    X(cuda_batch_graph_other_device)    \
    X(cuda_batch_graph_backoff)         \
    X(cuda_batch_graph_other_session)   \
    X(cuda_batch_graph_capture)         \
    X(batch_coalesces)                  \
    X(batch_flush_thread)               \
    X(batch_deferred_and_close)         \
    X(batch_off)                        \
    X(cuda_callback_gate)               \
    X(cuda_callback_parked_first)       \
    X(cuda_callback_cancel)             \
    X(cuda_callback_session_end)        \
    X(cuda_bad_payloads)                \
    X(cuda_graph_nodes)                 \
    X(cuda_graph_update_hostile)        \
    X(cuda_graph_copy_shapes)           \
    X(cuda_graph_capture)               \
    X(cuda_host_func_captured)          \
    X(cuda_capture_graph)               \
    X(cuda_graph_cond)                  \
    X(cuda_graph_child)                 \
    X(cuda_graph_event_nodes)           \
    X(cuda_graph_instantiate_params)    \
    X(cuda_user_objects)                \
    X(cuda_capture_deps)                \
    X(cuda_link)                        \
    X(cuda_ctx_reset)                   \
    X(cuda_mempool)                     \
    X(cuda_memcpy_stable_async)         \
    X(cuda_fence)                       \
    X(cuda_add_ram)                     \
    X(cuda_add_ram_during_capture)      \
    X(cuda_host_device_pointer)         \
    X(cuda_module_global_info)          \
    X(printf_image_detect)              \
    X(cuda_printf_capture)              \
    X(cuda_printf_no_capture)           \
    X(sec_ctx_flags_coredump)           \
    X(sec_graph_module_unload)          \
    X(sec_capture_module_unload)        \
    X(sec_callback_wait_async_item)     \
    X(sec_function_handle_cost)         \
    X(sec_mempool_per_session)          \
    X(sec_capture_global_confined)      \
    X(sec_ctx_reset_cross_device_function) \
    X(cuda_call_roundtrip)              \
    X(cuda_call_hostile)                \
    /* test_quota.c */                  \
    X(quota_account)                    \
    X(quota_report_hostile)             \
    X(quota_alloc_exact)                \
    X(quota_hostile)                    \
    X(quota_two_sessions)               \
    X(quota_pool)                       \
    X(quota_graph_mem)                  \
    X(quota_graph_mem_other_session)    \
    X(quota_module_globals)             \
    X(quota_slice_hostile)              \
    X(quota_limits)                     \
    X(quota_ctx_reset)                  \
    X(quota_stack_limit)                \
    X(quota_local_memory)               \
    X(quota_local_memory_refused)       \
    X(quota_ctx_charged)                \
    X(quota_host_memory)                \
    X(quota_faults)                     \
    X(quota_proxy_worker_killed)        \
    X(quota_proxy_stats)                \
    X(quota_proxy_ctx_bytes)            \
    X(quota_proxy_aliases)              \
    X(quota_guest_pools)                \
    X(quota_proxy_alias_at)             \
    X(quota_proxy_reset_frees)          \
    X(quota_proxy_local_memory)         \
    /* test_vmm.c */                    \
    X(vmm_quota)                        \
    X(vmm_hostile)                      \
    X(vmm_virtual_device)               \
    /* test_array.c */                  \
    X(array_bad_desc)                   \
    X(array_handles)                    \
    X(array_copy)                       \
    X(array_texobj)                     \
    X(array_quota)                      \
    X(array_mipmap)                     \
    /* test_ipc.c */                    \
    X(ipc_two_processes)                \
    X(ipc_not_offered)                  \
    /* test_share.c */                  \
    X(share_vmm_two_vms)                \
    X(share_vmm_not_offered)            \
    X(share_pool_two_vms)               \
    X(share_pool_access_sessions)       \
    /* test_peer.c */                   \
    X(peer_hostile)                     \
    X(memops_hostile)                   \
    /* test_modcache.c */               \
    X(cuda_module_cache_hit)            \
    X(cuda_module_cache_keep)           \
    X(cuda_module_cache_hostile)        \
    X(cuda_module_cache_bad_dir)        \
    /* test_cuda.c: migration */        \
    X(migrate_roundtrip)                \
    X(migrate_ctx_memory)               \
    X(migrate_precopy)                  \
    X(migrate_packed_refused)           \
    X(migrate_first_use)                \
    X(migrate_peer)                     \
    X(migrate_refused)                  \
    X(migrate_load_checks)              \
    X(migrate_graph)                    \
    X(migrate_capture_in_progress)      \
    X(migrate_host_func)                \
    X(migrate_graph_host)               \
    X(migrate_graph_child)

#endif /* VCU_TEST_LIST_CUDA_H */
