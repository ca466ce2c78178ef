/* Diagnostics on stderr, controlled by NCCLSIM_LOG=0..3 (default 0: only
 * configuration errors, which are always printed). */
#ifndef NCCLSIM_LOG_H
#define NCCLSIM_LOG_H

enum { FC_LOG_ERROR = 1, FC_LOG_INFO = 2, FC_LOG_DEBUG = 3 };

int fc_log_level(void);
void fc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Always printed: the platform cannot work as configured. */
void fc_log_fatal_config(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define FC_LOG(level, ...)                                                    \
    do {                                                                      \
        if (fc_log_level() >= (level)) fc_log((level), __VA_ARGS__);          \
    } while (0)

#endif
