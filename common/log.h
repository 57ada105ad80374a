/*
 * log.h - stderr logging shared by every gpushare program.
 *
 * Never stdout: the hook lives inside other people's programs, whose stdout
 * is theirs.  The level comes from GPUSHARE_LOG (error, warn, info, debug).
 */
#ifndef GS_LOG_H
#define GS_LOG_H

typedef enum { GS_LOG_ERROR = 0, GS_LOG_WARN, GS_LOG_INFO, GS_LOG_DEBUG } gs_log_level_t;

/* Program name shown in every line; level read from GPUSHARE_LOG, falling
 * back to dflt.  Safe to call again (the hook re-reads after fork). */
void gs_log_init(const char *program, gs_log_level_t dflt);
void gs_log_set_level(gs_log_level_t level);
int gs_log_enabled(gs_log_level_t level);
void gs_log(gs_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse a level name; -1 when unknown. */
int gs_log_level_parse(const char *name);

#define gs_error(...) gs_log(GS_LOG_ERROR, __VA_ARGS__)
#define gs_warn(...)  gs_log(GS_LOG_WARN, __VA_ARGS__)
#define gs_info(...)  gs_log(GS_LOG_INFO, __VA_ARGS__)
#define gs_debug(...)                                                                              \
    do {                                                                                           \
        if (gs_log_enabled(GS_LOG_DEBUG))                                                          \
            gs_log(GS_LOG_DEBUG, __VA_ARGS__);                                                     \
    } while (0)

#endif
