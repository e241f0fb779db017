/*
 * A minimal NVTX v3 injection library for tests: it attaches to every NVTX instance in the
 * process (NVTX_INJECTION64_PATH=<this .so>) and appends one line per call to the file named
 * by ASYNCTRACE_NVTX_LOG:
 *
 *   domain <domain>                         nvtxDomainCreateA
 *   string <domain> <text>                  nvtxDomainRegisterStringA
 *   push <domain> <message> <argb-hex>      nvtxDomainRangePushEx (and nvtxRangePushA/Ex)
 *   pop <domain>                            nvtxDomainRangePop (and nvtxRangePop)
 *
 * The default domain (NULL handle) is written as "-". Built by tests/capture/test_nvtx_injection.py.
 */
#include <nvtx3/nvToolsExt.h> /* also brings the injection types (nvtxDetail/nvtxTypes.h) */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[256];
} log_domain;

typedef struct {
    const log_domain *domain;
    char *text;
} log_string;

static FILE *g_log = NULL;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *domain_name(nvtxDomainHandle_t domain) {
    return domain ? ((const log_domain *)domain)->name : "-";
}

static void log_line(const char *fmt, const char *a, const char *b, unsigned int color, int with_color) {
    if (!g_log) return;
    pthread_mutex_lock(&g_lock);
    fprintf(g_log, fmt, a, b);
    if (with_color) fprintf(g_log, " %08x", color);
    fputc('\n', g_log);
    fflush(g_log);
    pthread_mutex_unlock(&g_lock);
}

static const char *message_of(const nvtxEventAttributes_t *attr) {
    if (!attr) return "?";
    switch (attr->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return attr->message.ascii ? attr->message.ascii : "?";
    case NVTX_MESSAGE_TYPE_REGISTERED:
        return attr->message.registered ? ((const log_string *)attr->message.registered)->text : "?";
    default: return "?";
    }
}

static nvtxDomainHandle_t NVTX_API my_domain_create(const char *name) {
    log_domain *d = (log_domain *)calloc(1, sizeof(log_domain));
    if (!d) return NULL;
    strncpy(d->name, name ? name : "", sizeof(d->name) - 1);
    log_line("domain %s%s", d->name, "", 0, 0);
    return (nvtxDomainHandle_t)d;
}

static void NVTX_API my_domain_destroy(nvtxDomainHandle_t domain) { (void)domain; }

static nvtxStringHandle_t NVTX_API my_register_string(nvtxDomainHandle_t domain, const char *text) {
    log_string *s = (log_string *)calloc(1, sizeof(log_string));
    if (!s) return NULL;
    s->domain = (const log_domain *)domain;
    s->text = strdup(text ? text : "");
    log_line("string %s %s", domain_name(domain), s->text, 0, 0);
    return (nvtxStringHandle_t)s;
}

static int NVTX_API my_domain_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr) {
    unsigned int color = (attr && attr->colorType == NVTX_COLOR_ARGB) ? attr->color : 0;
    log_line("push %s %s", domain_name(domain), message_of(attr), color, 1);
    return 0;
}

static int NVTX_API my_domain_pop(nvtxDomainHandle_t domain) {
    log_line("pop %s%s", domain_name(domain), "", 0, 0);
    return 0;
}

static int NVTX_API my_push_a(const char *message) {
    log_line("push %s %s", "-", message ? message : "?", 0, 1);
    return 0;
}

static int NVTX_API my_push_ex(const nvtxEventAttributes_t *attr) { return my_domain_push(NULL, attr); }

static int NVTX_API my_pop(void) { return my_domain_pop(NULL); }

static int set_slot(NvtxGetExportTableFunc_t get_table, NvtxCallbackModule module, unsigned int cbid,
                    NvtxFunctionPointer fn) {
    const NvtxExportTableCallbacks *etbl =
        (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!etbl || !etbl->GetModuleFunctionTable) return 0;
    if (!etbl->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
    if (cbid >= size || !table[cbid]) return 0;
    *table[cbid] = fn;
    return 1;
}

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    const char *path = getenv("ASYNCTRACE_NVTX_LOG");
    if (!get_table || !path) return 0;
    pthread_mutex_lock(&g_lock);
    if (!g_log) g_log = fopen(path, "a");
    pthread_mutex_unlock(&g_lock);
    if (!g_log) return 0;
    return set_slot(get_table, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA,
                    (NvtxFunctionPointer)my_domain_create)
        && set_slot(get_table, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainDestroy,
                    (NvtxFunctionPointer)my_domain_destroy)
        && set_slot(get_table, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA,
                    (NvtxFunctionPointer)my_register_string)
        && set_slot(get_table, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx,
                    (NvtxFunctionPointer)my_domain_push)
        && set_slot(get_table, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop,
                    (NvtxFunctionPointer)my_domain_pop)
        && set_slot(get_table, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA,
                    (NvtxFunctionPointer)my_push_a)
        && set_slot(get_table, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx,
                    (NvtxFunctionPointer)my_push_ex)
        && set_slot(get_table, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop,
                    (NvtxFunctionPointer)my_pop);
}
