/* NCCLSIM_NO_PAYLOAD (payload.h): read once per library. */
#include "payload.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static bool no_payload;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_setting(void)
{
    const char *v = getenv("NCCLSIM_NO_PAYLOAD");
    no_payload = v && !strcmp(v, "1");
}

bool fc_no_payload(void)
{
    pthread_once(&once, read_setting);
    return no_payload;
}
