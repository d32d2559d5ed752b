// ytk TensorRT plugin shim, engine API trt8-IPluginV2DynamicExt: IPluginV2DynamicExt + IPluginCreator.
//
// Template read by ytk_backend_nvcc/trt_shim.py and appended after common.inc.cpp. Written against the
// TensorRT 8.6 interface (int32_t Dims, IExprBuilder::constant(int32_t)); compiles against 10.x headers too,
// where the interface is deprecated but still loaded.

#if NV_TENSORRT_MAJOR < 8 || (NV_TENSORRT_MAJOR == 8 && NV_TENSORRT_MINOR < 6)
#error "ytk shim: the IPluginV2DynamicExt shim needs TensorRT 8.6 or newer (dynamic plugin libraries, ILoggerFinder)"
#endif

namespace
{
namespace ytk
{
class PluginV2 final : public nvinfer1::IPluginV2DynamicExt
{
public:
    explicit PluginV2(Fields fields)
        : mFields(std::move(fields))
    {
        mFields.stampFingerprint();
    }

    // -- identity ---------------------------------------------------------------------------------------------
    char const* getPluginType() const noexcept override
    {
        return kName;
    }
    char const* getPluginVersion() const noexcept override
    {
        return kVersion;
    }
    void setPluginNamespace(char const* pluginNamespace) noexcept override
    {
        try
        {
            mNamespace = pluginNamespace ? pluginNamespace : "";
        }
        catch (...)
        {
        }
    }
    char const* getPluginNamespace() const noexcept override
    {
        return mNamespace.c_str();
    }
    nvinfer1::IPluginV2DynamicExt* clone() const noexcept override
    {
        try
        {
            return new PluginV2(*this);
        }
        catch (...)
        {
            logError("clone: out of memory");
            return nullptr;
        }
    }
    void destroy() noexcept override
    {
        delete this;
    }
    int32_t initialize() noexcept override
    {
        return 0;
    }
    void terminate() noexcept override {}

    // -- shapes, types, formats -------------------------------------------------------------------------------
    int32_t getNbOutputs() const noexcept override
    {
        return kNbOutputs;
    }
    DataType getOutputDataType(
        int32_t index, DataType const* /*inputTypes*/, int32_t /*nbInputs*/) const noexcept override
    {
        return index >= 0 && index < kNbOutputs ? kTypes[kNbInputs + index] : DataType::kFLOAT;
    }
    nvinfer1::DimsExprs getOutputDimensions(int32_t outputIndex, nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override
    {
        nvinfer1::DimsExprs outs[kNbOutputs] = {};
        if (outputIndex < 0 || outputIndex >= kNbOutputs || !outputShapes(inputs, nbInputs, outs, exprBuilder))
        {
            logError("getOutputDimensions: the inputs do not have the ranks the contract declares");
            return nvinfer1::DimsExprs{};
        }
        return outs[outputIndex];
    }
    bool supportsFormatCombination(
        int32_t pos, nvinfer1::PluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept override
    {
        return inOut != nullptr && supports(pos, inOut[pos].type, inOut[pos].format, nbInputs, nbOutputs);
    }
    void configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept override
    {
        try
        {
            std::string why;
            Dims dims[kNbInputs];
            for (int32_t i = 0; i < kNbInputs && i < nbInputs; ++i)
            {
                dims[i] = in[i].desc.dims;
            }
            if (nbOutputs != kNbOutputs || !ranksMatch(dims, nbInputs, why))
            {
                logError("configurePlugin: " + (why.empty() ? std::string("wrong number of outputs") : why));
            }
        }
        catch (...)
        {
        }
    }
    size_t getWorkspaceSize(nvinfer1::PluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept override
    {
        Dims dims[kNbInputs];
        for (int32_t i = 0; i < kNbInputs && i < nbInputs; ++i)
        {
            dims[i] = inputs[i].dims;
        }
        return workspaceFor(dims, nbInputs);
    }

    // -- execution --------------------------------------------------------------------------------------------
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override
    {
        return run(inputDesc, outputDesc, inputs, outputs, workspace, stream);
    }

    // -- serialisation: the attributes and the contract fingerprint -----------------------------------------
    size_t getSerializationSize() const noexcept override
    {
        return mFields.serializedSize();
    }
    void serialize(void* buffer) const noexcept override
    {
        mFields.serialize(buffer);
    }

private:
    Fields mFields;
    std::string mNamespace;
};

class CreatorV2 final : public nvinfer1::IPluginCreator
{
public:
    explicit CreatorV2(char const* pluginNamespace)
        : mNamespace(pluginNamespace)
    {
    }

    char const* getPluginName() const noexcept override
    {
        return kName;
    }
    char const* getPluginVersion() const noexcept override
    {
        return kVersion;
    }
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        return &mNoFields; // the contract declares no attributes; any given are kept all the same
    }
    nvinfer1::IPluginV2* createPlugin(char const* /*name*/, nvinfer1::PluginFieldCollection const* fc) noexcept override
    {
        try
        {
            Fields fields;
            std::string why;
            if (!fields.assign(fc, why) || !fields.fingerprintMatches(why))
            {
                logError("createPlugin: " + why);
                return nullptr;
            }
            auto* plugin = new PluginV2(std::move(fields));
            plugin->setPluginNamespace(mNamespace);
            return plugin;
        }
        catch (...)
        {
            logError("createPlugin: out of memory");
            return nullptr;
        }
    }
    nvinfer1::IPluginV2* deserializePlugin(
        char const* /*name*/, void const* serialData, size_t serialLength) noexcept override
    {
        try
        {
            Fields fields;
            std::string why;
            if (!fields.deserialize(serialData, serialLength, why) || !fields.fingerprintMatches(why))
            {
                logError("deserializePlugin: " + why);
                return nullptr;
            }
            auto* plugin = new PluginV2(std::move(fields));
            plugin->setPluginNamespace(mNamespace);
            return plugin;
        }
        catch (...)
        {
            logError("deserializePlugin: out of memory");
            return nullptr;
        }
    }
    void setPluginNamespace(char const* /*pluginNamespace*/) noexcept override
    {
        // Fixed by the contract: one creator per namespace (the selector's, and the empty one).
    }
    char const* getPluginNamespace() const noexcept override
    {
        return mNamespace;
    }

private:
    char const* mNamespace;
    nvinfer1::PluginFieldCollection mNoFields{};
};

CreatorV2 gCreatorInNamespace(kNamespace);
CreatorV2 gCreatorInEmptyNamespace("");
nvinfer1::IPluginCreator* gCreators[] = {&gCreatorInNamespace, &gCreatorInEmptyNamespace};
} // namespace ytk
} // namespace

// TensorRT 8.6+ dynamic plugin library entry point: the creators to register (the selector's namespace and, when
// that is not already empty, the empty namespace).
extern "C" __attribute__((visibility("default"))) nvinfer1::IPluginCreator* const* getPluginCreators(
    int32_t& nbCreators)
{
    nbCreators = ytk::kNamespace[0] != '\0' ? 2 : 1;
    return ytk::gCreators;
}

#pragma GCC diagnostic pop
