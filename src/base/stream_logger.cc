#include "stagehand/base/stream_logger.h"
