/* Wire protocol: struct sizes, the opcode and status tables. */
#include <stddef.h>

#include "vcu_proto.h"
#include "vcu_test.h"

TEST(proto_struct_sizes)
{
    ASSERT_EQ(32, sizeof(struct vcu_req_hdr));
    ASSERT_EQ(16, sizeof(struct vcu_seg));
    ASSERT_EQ(16, sizeof(struct vcu_range));
    ASSERT_EQ(24, sizeof(struct vcu_resp_hdr));
    ASSERT_EQ(0, offsetof(struct vcu_resp_hdr, status));
    ASSERT_EQ(32, sizeof(struct vcu_session_open_req));
    ASSERT_EQ(40, sizeof(struct vcu_session_open_resp));
    ASSERT_EQ(16, sizeof(struct vcu_echo_req));
    ASSERT_EQ(32, sizeof(struct vcu_echo_resp));
    ASSERT_EQ(8, sizeof(struct vcu_cu_hdr));
    ASSERT_EQ(8, sizeof(struct vcu_cu_resp));
    ASSERT_EQ(64, sizeof(struct vcu_cu_launch_req));
    ASSERT_EQ(176, sizeof(struct vcu_cu_graph_node_req));
    /* Field offsets the kernel and QEMU read with byte-order helpers. */
    ASSERT_EQ(0, offsetof(struct vcu_req_hdr, opcode));
    ASSERT_EQ(8, offsetof(struct vcu_req_hdr, session));
    ASSERT_EQ(16, offsetof(struct vcu_req_hdr, req_id));
    ASSERT_EQ(24, offsetof(struct vcu_req_hdr, payload_len));
    ASSERT_EQ(28, offsetof(struct vcu_req_hdr, nsegs));
    ASSERT_EQ(8, offsetof(struct vcu_seg, nranges));
    return 0;
}

typedef struct {
    const char *name;
    unsigned int num;
    size_t req_size;
    size_t resp_size;
} op_t;

#define OP_ENTRY(name, num, req, resp) {#name, num, sizeof(struct req), sizeof(struct resp)},
static const op_t ops[] = {VCU_OP_MAP(OP_ENTRY)};
#undef OP_ENTRY

TEST(proto_opcode_table)
{
    size_t n = sizeof(ops) / sizeof(ops[0]), i, j;

    ASSERT_GE(n, 3);
    ASSERT_EQ(VCU_OP_SESSION_OPEN, ops[0].num);
    for (i = 0; i < n; i++) {
        ASSERT_TRUE(ops[i].name != NULL && ops[i].name[0] != '\0');
        ASSERT_NE(0, ops[i].num);
        /* Request payloads are padded to 8: fixed structs keep that. */
        ASSERT_EQ(0, ops[i].req_size % 8);
        ASSERT_LE(ops[i].req_size, VCU_MAX_PAYLOAD);
        /* Transport opcodes below 0x100; CUDA ones replies start with vcu_cu_resp. */
        if (ops[i].num >= 0x100)
            ASSERT_GE(ops[i].resp_size, sizeof(struct vcu_cu_resp));
        else
            ASSERT_TRUE(VCU_OP_IS_TRANSPORT(ops[i].num) || ops[i].num == VCU_OP_ECHO);
        for (j = i + 1; j < n; j++) {
            ASSERT_NE(ops[i].num, ops[j].num);
            ASSERT_TRUE(strcmp(ops[i].name, ops[j].name) != 0);
        }
    }
    return 0;
}

#define ST_ENTRY(name, val, msg) {#name, val, msg},
static const struct {
    const char *name;
    int val;
    const char *msg;
} statuses[] = {VCU_STATUS_MAP(ST_ENTRY)};
#undef ST_ENTRY

TEST(proto_status_map)
{
    size_t n = sizeof(statuses) / sizeof(statuses[0]), i;

    ASSERT_EQ(VCU_S_COUNT_, n);
    for (i = 0; i < n; i++) {
        ASSERT_EQ(i, statuses[i].val);     /* dense, in order */
        ASSERT_STR_EQ(statuses[i].msg, vcu_status_str(statuses[i].val));
        ASSERT_STR_EQ(statuses[i].msg, vcu_status_str(-statuses[i].val));
    }
    ASSERT_EQ(-VCU_S_EBUSY, VCU_EBUSY);
    ASSERT_EQ(-VCU_S_ENODEV, VCU_ENODEV);
    ASSERT_EQ(0, VCU_OK);
    ASSERT_STR_EQ("unknown virtio-cuda status", vcu_status_str(VCU_S_COUNT_));
    return 0;
}

TEST(proto_echo_byte)
{
    unsigned int differ = 0, i;

    ASSERT_EQ(vcu_echo_byte(1, 0), vcu_echo_byte(1, 0));
    for (i = 0; i < 256; i++)
        differ += vcu_echo_byte(42, i) != vcu_echo_byte(43, i);
    ASSERT_GT(differ, 200);         /* the seed matters */
    differ = 0;
    for (i = 1; i < 256; i++)
        differ += vcu_echo_byte(42, i) != vcu_echo_byte(42, i - 1);
    ASSERT_GT(differ, 200);         /* the offset matters */
    return 0;
}
