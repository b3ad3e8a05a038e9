/* A minimal NVTX tool for tests/nvtx.rs: loaded by NVTX through NVTX_INJECTION64_PATH, it
 * logs every domain creation, string registration, range push and range pop to the file
 * named by GPU_EVENT_POOL_NVTX_LOG, one line per call:
 *
 *   push <tid> <domain> <name>
 *   pop <tid> <domain>
 *
 * The types mirror NVTX's tool ABI (nvtxDetail/nvtxTypes.h, nvToolsExt.h of NVTX 3); only
 * what this tool touches is declared. Handles are the tool's own: a domain or registered
 * string handle is a copy of its name.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;
typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t export_table_id);

typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table, unsigned int *out_size);
} NvtxExportTableCallbacks;

enum { ETID_CALLBACKS = 1, MODULE_CORE2 = 5 };
enum {
    CBID_DOMAIN_RANGE_PUSH_EX = 4,
    CBID_DOMAIN_RANGE_POP = 5,
    CBID_DOMAIN_REGISTER_STRING_A = 10,
    CBID_DOMAIN_CREATE_A = 12,
};
enum { MESSAGE_ASCII = 1, MESSAGE_REGISTERED = 3 };

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    uint64_t payload;
    int32_t message_type;
    const void *message;
} EventAttributes;

static FILE *log_file;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *name_of(const void *handle) { return handle ? (const char *)handle : "(default)"; }

static void *domain_create_a(const char *name) { return strdup(name); }

static void *domain_register_string_a(void *domain, const char *string) {
    (void)domain;
    return strdup(string);
}

static int domain_range_push_ex(void *domain, const EventAttributes *attributes) {
    const char *name = "(none)";
    if (attributes->message_type == MESSAGE_ASCII || attributes->message_type == MESSAGE_REGISTERED)
        name = (const char *)attributes->message;
    pthread_mutex_lock(&log_lock);
    fprintf(log_file, "push %ld %s %s\n", (long)syscall(SYS_gettid), name_of(domain), name);
    fflush(log_file);
    pthread_mutex_unlock(&log_lock);
    return 0;
}

static int domain_range_pop(void *domain) {
    pthread_mutex_lock(&log_lock);
    fprintf(log_file, "pop %ld %s\n", (long)syscall(SYS_gettid), name_of(domain));
    fflush(log_file);
    pthread_mutex_unlock(&log_lock);
    return 0;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const char *path = getenv("GPU_EVENT_POOL_NVTX_LOG");
    if (!path || !(log_file = fopen(path, "w")))
        return 0;
    const NvtxExportTableCallbacks *callbacks = get_export_table(ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!callbacks || !callbacks->GetModuleFunctionTable(MODULE_CORE2, &table, &size) || size <= CBID_DOMAIN_CREATE_A)
        return 0;
    *table[CBID_DOMAIN_RANGE_PUSH_EX] = (NvtxFunctionPointer)domain_range_push_ex;
    *table[CBID_DOMAIN_RANGE_POP] = (NvtxFunctionPointer)domain_range_pop;
    *table[CBID_DOMAIN_REGISTER_STRING_A] = (NvtxFunctionPointer)domain_register_string_a;
    *table[CBID_DOMAIN_CREATE_A] = (NvtxFunctionPointer)domain_create_a;
    return 1;
}
