/*
 * The one list of unit tests.  X(name) for each TEST(name) defined in a
 * tests/unit/test_*.c file; the runner runs them in this order.
 *
 * The CUDA executor's tests are listed the same way in test_list_cuda.h,
 * which defines VCU_TESTS_CUDA(X); the runner includes it when it exists.
 */
#ifndef VCU_TEST_LIST_H
#define VCU_TEST_LIST_H

#define VCU_TESTS(X)                    \
    /* test_proto.c */                  \
    X(proto_struct_sizes)               \
    X(proto_opcode_table)               \
    X(proto_status_map)                 \
    X(proto_echo_byte)                  \
    /* test_calllist.c */               \
    X(call_list_counts)                 \
    X(call_list_host_fns)               \
    /* test_validate.c */               \
    X(val_resp_too_small)               \
    X(val_resp_null)                    \
    X(val_short_header)                 \
    X(val_null_request_bytes)           \
    X(val_hdr_reserved_nonzero)         \
    X(val_hdr_flags_unknown)            \
    X(val_payload_too_large)            \
    X(val_payload_beyond_req_len)       \
    X(val_seg_table_beyond_req_len)     \
    X(val_range_list_ignored)           \
    X(val_nsegs_too_many)               \
    X(val_nsegs_mismatch)               \
    X(val_segs_null)                    \
    X(val_seg_flags_zero)               \
    X(val_seg_flags_both)               \
    X(val_seg_flags_unknown_bit)        \
    X(val_seg_flags_host_mismatch)      \
    X(val_seg_len_mismatch)             \
    X(val_seg_iov_sum_short)            \
    X(val_seg_iov_sum_long)             \
    X(val_seg_iov_overflow)             \
    X(val_seg_iov_null)                 \
    X(val_xfer_too_large)               \
    X(val_xfer_sum_too_large)           \
    X(val_unknown_opcode)               \
    X(val_unknown_session)              \
    X(val_payload_short_for_op)         \
    X(val_req_id_in_error_reply)        \
    X(val_complete_oversize)            \
    X(val_seg_stable_to_device)         \
    X(val_seg_stable_from_device)       \
    X(val_seg_stable_alone)             \
    X(val_seg_stable_both_dirs)         \
    X(val_seg_stable_unknown_bit)       \
    X(val_seg_stable_host_mismatch)     \
    X(val_seg_stable_echo_data)         \
    X(val_fence_with_segment)           \
    /* test_session.c */                \
    X(sess_open_basic)                  \
    X(sess_open_reserved_nonzero)       \
    X(sess_open_nonzero_session)        \
    X(sess_open_with_segments)          \
    X(sess_version_mismatch)            \
    X(sess_too_many)                    \
    X(sess_close)                       \
    X(sess_close_queued)                \
    X(sess_close_cuts_delay)            \
    X(sess_features_enforced)           \
    X(sess_reset_cancels)               \
    X(sess_reset_idle)                  \
    X(sess_free_with_work)              \
    X(sess_reuse_after_reset)           \
    X(sess_new_bad_args)                \
    X(sess_execute_restores)            \
    X(sess_cuda_enodev)                 \
    X(sess_fence_basic)                 \
    X(sess_fence_ordering)              \
    X(sess_fence_reset)                 \
    /* test_echo.c */                   \
    X(echo_sizes)                       \
    X(echo_multi_iov)                   \
    X(echo_in_shorter)                  \
    X(echo_out_shorter)                 \
    X(echo_fill)                        \
    X(echo_payload_tail)                \
    X(echo_bad_flags)                   \
    X(echo_delay_too_long)              \
    X(echo_delay)                       \
    X(echo_reply_too_small)             \
    X(echo_fifo_order)                  \
    X(echo_many_threads)                \
    /* test_wait.c */                   \
    X(wait_echo_slow_quick)             \
    X(wait_stream_sync_parked)          \
    X(wait_event_later_work)            \
    X(wait_reset_cancels)               \
    X(wait_fence_after_copies)          \
    X(wait_bounce_budget)               \
    /* test_proxy.c */                  \
    X(ring_wrap_full)                   \
    X(ring_corrupt_index)               \
    X(proxy_ring_wrap_full)             \
    X(proxy_worker_hardened)            \
    X(proxy_worker_killed)              \
    X(proxy_poll)                       \
    X(proxy_poll_window)                \
    X(proxy_frame_sizes)                \
    X(proxy_ring_corrupt)               \
    X(proxy_reply_after_scatter)        \
    X(proxy_migrate)                    \
    /* test_integrity.c */              \
    X(md2_rfc1319)                      \
    X(integrity_steps)                  \
    X(integrity_hmac)                   \
    /* test_managed.c */                \
    X(managed_roundtrip)                \
    X(managed_host_touch_while_busy)    \
    X(managed_partial_wait)             \
    X(managed_attach)                   \
    /* test_fatbin.c */                 \
    X(fatbin_trim_choice)               \
    X(fatbin_trim_refuses)              \
    /* test_kernels.c */                \
    X(kernels_lists)                    \
    X(kernels_hostile)                  \
    /* test_modcache.c */               \
    X(sha256_vectors)                   \
    X(modcache_store_hit_miss)          \
    X(modcache_corrupt_file)            \
    X(modcache_eviction_lru)            \
    X(modcache_dead_writer)             \
    X(modcache_bad_dir)                 \
    /* test_fdpass.c */                 \
    X(fdpass_roundtrip)                 \
    X(fdpass_excess_closed)             \
    X(fdpass_over_max)                  \
    /* test_sched.c */                  \
    X(sched_weights)                    \
    X(sched_sessions)                   \
    X(sched_idle)                       \
    X(sched_cap)                        \
    X(sched_dead_holder)                \
    X(sched_reaped_worker)              \
    X(sched_liars)                      \
    X(sched_lock_broken)                \
    X(sched_garbage)                    \
    X(sched_open_refuses)               \
    X(sched_proxy_config)               \
    X(sched_proxy_live_change)          \
    X(sched_proxy_shares)

#endif /* VCU_TEST_LIST_H */
